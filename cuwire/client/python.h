/* cuwire client: the marks on the declarations that cross between the client's C and its embedded Python.
 * client/build.py reads every declaration so marked in the client's headers and declares it to cffi (the
 * only place cffi learns them), so a prototype is written once, here in C. */
#ifndef CUWIRE_PYTHON_H
#define CUWIRE_PYTHON_H
/* C that the Python side calls (or a variable it reads): exported, as the Python half is a library apart */
#define CW_FROM_PYTHON __attribute__((visibility("default")))
#define CW_IN_PYTHON   /* a function written in Python (cffi's extern "Python+C") that the C calls */
#endif
