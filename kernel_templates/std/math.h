// <math.h> for device code compiled by NVRTC, which ships no C++ standard library headers: kjit's <cmath>
// (kernel_templates/std/cmath). Its functions are CUDA's device math library, which NVRTC declares in the
// global namespace itself. kjit hands this file to NVRTC only when no folder of the template's, the user's or
// the CUDA toolkit's has a math.h (docs/header-libraries.md), and hashes it into the cache key.
#ifndef KJIT_STD_MATH_H
#define KJIT_STD_MATH_H
#include <cmath>
#endif  // KJIT_STD_MATH_H
