// SPDX-License-Identifier: MIT
// The GPU runtime's host API under one set of names, for the host backend
// the CUDA and HIP modules share (gpu_backend.h): names only, no logic.
// The including file defines FA_GPU_RUNTIME_CUDA or FA_GPU_RUNTIME_HIP
// first. (Device code has its own layer, compat.h.)
#ifndef FA_GPU_RUNTIME_H
#define FA_GPU_RUNTIME_H

#if defined(FA_GPU_RUNTIME_CUDA)
#include <cuda_runtime_api.h>
#define FA_RT "cuda" // prefix of the runtime's function names, for messages
typedef cudaError_t fa_rt_error;
typedef cudaStream_t fa_rt_stream;
#define FA_RT_SUCCESS cudaSuccess
#define FA_RT_OUT_OF_MEMORY cudaErrorMemoryAllocation
#define FA_RT_H2D cudaMemcpyHostToDevice
#define FA_RT_D2H cudaMemcpyDeviceToHost
#define fa_rt_get_device_count cudaGetDeviceCount
#define fa_rt_set_device cudaSetDevice
#define fa_rt_malloc cudaMalloc
#define fa_rt_free cudaFree
#define fa_rt_memcpy_async cudaMemcpyAsync
#define fa_rt_memset_async cudaMemsetAsync
#define fa_rt_stream_synchronize cudaStreamSynchronize
#define fa_rt_get_last_error cudaGetLastError
#define fa_rt_error_string cudaGetErrorString
#define fa_rt_error_name cudaGetErrorName
/* cudaMemcpyAsync from pageable memory stages the source before it
   returns, so the source may be freed right after. */
#define FA_RT_PAGEABLE_COPY_STAGED 1
#elif defined(FA_GPU_RUNTIME_HIP)
#include <hip/hip_runtime_api.h>
#define FA_RT "hip"
typedef hipError_t fa_rt_error;
typedef hipStream_t fa_rt_stream;
#define FA_RT_SUCCESS hipSuccess
#define FA_RT_OUT_OF_MEMORY hipErrorOutOfMemory
#define FA_RT_H2D hipMemcpyHostToDevice
#define FA_RT_D2H hipMemcpyDeviceToHost
#define fa_rt_get_device_count hipGetDeviceCount
#define fa_rt_set_device hipSetDevice
#define fa_rt_malloc hipMalloc
#define fa_rt_free hipFree
#define fa_rt_memcpy_async hipMemcpyAsync
#define fa_rt_memset_async hipMemsetAsync
#define fa_rt_stream_synchronize hipStreamSynchronize
#define fa_rt_get_last_error hipGetLastError
#define fa_rt_error_string hipGetErrorString
#define fa_rt_error_name hipGetErrorName
/* HIP documents no such staging: the copy is waited for. */
#define FA_RT_PAGEABLE_COPY_STAGED 0
#else
#error "define FA_GPU_RUNTIME_CUDA or FA_GPU_RUNTIME_HIP before gpu_runtime.h"
#endif

#endif
