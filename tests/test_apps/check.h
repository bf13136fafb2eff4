// check.h: the error check shared by the CUDA test apps, kept here once instead of in every app.
// CHECK(call) runs a CUDA runtime call and, if it fails, prints "<call> failed: <code> <name>" on
// stdout and exits with status 1. Apps whose check behaves differently (launch_api.cu's CHECK,
// error_paths.cu's expect(), the per-app OK/FAIL reporters) keep their own: the apps' stdout and
// exit codes are compared byte for byte with expected/*.out.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            printf("%s failed: %d %s\n", #call, (int)err_, cudaGetErrorName(err_));        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
