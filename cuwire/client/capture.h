/* cuwire client: stream capture as the client keeps it (capture.c). */
#ifndef CUWIRE_CAPTURE_H
#define CUWIRE_CAPTURE_H
#include <stdint.h>

/* The capture `stream` is in (0: none). */
uint64_t cuwire_capture_of(void *stream);
/* The capture the calling thread's cuStreamEndCapture just ended (0: none), taken once. */
uint64_t cuwire_capture_ended(void);
/* The capture mode the session thread needs for the calling thread's calls; -1: none needed. */
int cuwire_server_capture_mode(void);

#endif
