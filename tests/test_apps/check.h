// check.h: the error checks shared by the CUDA test apps (and tests/lib_apps), C and C++, kept here
// once instead of in every app. CHECK(call) runs a CUDA runtime call, CHECK_DRIVER(call) a driver
// call; if it fails, it prints "<call> failed: <code> <name>" on stdout and exits with status 1. Apps whose check behaves differently (launch_api.cu's CHECK,
// error_paths.cu's expect(), the per-app OK/FAIL reporters) keep their own: the apps' stdout and
// exit codes are compared byte for byte with expected/*.out.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            printf("%s failed: %d %s\n", #call, (int)err_, cudaGetErrorName(err_));        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define CHECK_DRIVER(call)                                                                 \
    do {                                                                                   \
        CUresult err_ = (call);                                                            \
        if (err_ != CUDA_SUCCESS) {                                                        \
            const char *name_ = NULL;                                                      \
            cuGetErrorName(err_, &name_);                                                  \
            printf("%s failed: %d %s\n", #call, (int)err_, name_ ? name_ : "?");           \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
