// SPDX-License-Identifier: MIT
/**
 * @file flashattn_mpi.h
 * @brief The MPI transport of the ring layer (libflashattn-mpi).
 *
 * Host buffers (a CUDA-aware MPI may be given device buffers; the ring
 * does not ask). The library never calls MPI_Init or MPI_Finalize: the
 * program initialises MPI (any thread level; the ring calls MPI from one
 * thread at a time) and destroys its communicators before MPI_Finalize.
 */
#ifndef FLASHATTN_MPI_H
#define FLASHATTN_MPI_H

#include <mpi.h>

#include "flashattn_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Make a communicator over the ranks of @p comm (collective over @p comm).
 * The ring talks on a duplicate of @p comm (MPI_Comm_dup), with
 * MPI_ERRORS_RETURN so that an MPI failure becomes FA_ERR_BACKEND with
 * MPI's text instead of an abort; the caller keeps @p comm. Messages are
 * limited to INT_MAX bytes each (one K/V block per step). Free with
 * fa_comm_destroy() before MPI_Finalize.
 * @return FA_OK, FA_ERR_INVALID_ARGUMENT (NULL @p out, MPI_COMM_NULL, MPI
 * not initialised) or FA_ERR_BACKEND (an MPI call failed; the text says
 * which).
 */
FA_API fa_status fa_comm_create_mpi(MPI_Comm comm, fa_comm **out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_MPI_H */
