// The BLAS this extension links: the scipy-openblas32 wheel's OpenBLAS (prefixed symbols, private
// to this extension) or, with OMNI_BLAS=system, a system cblas.
#pragma once

#include <cblas.h>

#if defined(OMNI_BLAS_SCIPY_OPENBLAS)
#define OMNI_SGEMM scipy_cblas_sgemm
#define OMNI_BLAS_SET_THREADS scipy_openblas_set_num_threads
#define OMNI_BLAS_CORENAME scipy_openblas_get_corename
#else
#define OMNI_SGEMM cblas_sgemm
#endif

namespace omni::cpu {

// Our pools provide the parallelism: each sgemm runs on its calling thread only. OpenBLAS's own
// threads, started inside pool workers, would oversubscribe the cores and spin-wait beside them.
// Cheap after the first call; every engine that calls OMNI_SGEMM calls this when it is built.
void single_threaded_blas();

}  // namespace omni::cpu
