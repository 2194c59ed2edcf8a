// SPDX-License-Identifier: MIT
/**
 * @file flashattn_nccl.h
 * @brief The NCCL transport of the ring layer (libflashattn-nccl).
 *
 * Device buffers, ordered on the stream of the ring's context: the ring's
 * transfers run on a communication stream of their own, after an event on
 * @p stream (so they read finished data), and later work on @p stream waits
 * for them on the device (the host does not block).
 */
#ifndef FLASHATTN_NCCL_H
#define FLASHATTN_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "flashattn_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Make a communicator over @p comm (which the caller keeps and frees after
 * fa_comm_destroy()) for a context whose stream is @p stream (the one given
 * to fa_context_set_stream(); NULL = the default stream). Uses the current
 * CUDA device. Local, not collective.
 * @return FA_OK, FA_ERR_INVALID_ARGUMENT (NULL @p comm or @p out) or
 * FA_ERR_BACKEND (a CUDA or NCCL call failed; the text says which).
 */
FA_API fa_status fa_comm_create_nccl(ncclComm_t comm, cudaStream_t stream,
                                     fa_comm **out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_NCCL_H */
