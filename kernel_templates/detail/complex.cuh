// kjit_complex::complex<T>: the complex element type of kjit.elementwise (torch.complex64 is complex<float>,
// torch.complex128 complex<double>), with the arithmetic and the math functions PyTorch has for complex
// tensors. Layout and alignment are c10::complex's (two T, aligned to 2 * sizeof(T)), so a complex tensor's
// storage is read in place. A thin struct rather than libcu++'s cuda::std::complex: NVRTC parses it in
// well under a millisecond, and each formula is the one PyTorch's CUDA kernels compute (c10::complex's
// division, numpy's reciprocal; exp, log, sqrt, the trigonometric and hyperbolic functions as C99 Annex G
// writes them for finite values), so that results agree with PyTorch to the last bits or nearly.
//
// Functions: real, imag, conj, abs (a real result), angle (arg, real), norm (|z|^2, real), polar, exp,
// log, log2, log10, sqrt, rsqrt, pow, reciprocal, square, sin, cos, tan, sinh, cosh, tanh, sigmoid (via
// kjit_math), sgn. Comparisons: == and != only. Ordering (<, >, <=, >=) and the functions PyTorch has
// no complex form of (relu, gelu, erf, floor, fmod, min, max, ...) are refused with a static_assert that
// names the alternative; the inverse trigonometric functions are refused too (use torch for them).
// Framework-agnostic: plain CUDA C++, compiles with NVRTC and nvcc alike.
// An include guard, not #pragma once: numeric.cuh includes this file as "complex.cuh" and math.cuh as
// "detail/complex.cuh", which NVRTC's in-memory headers see as two files.
#ifndef KJIT_DETAIL_COMPLEX_CUH
#define KJIT_DETAIL_COMPLEX_CUH

namespace kjit_complex {

// A value of `false` that depends on T: a static_assert in a template fires only where it is used.
template <typename T>
struct always_false {
  static constexpr bool value = false;
};

template <typename T>
struct is_arith {
  static constexpr bool value = false;
};
#define KJIT_COMPLEX_ARITH(T)           \
  template <>                           \
  struct is_arith<T> {                  \
    static constexpr bool value = true; \
  };
KJIT_COMPLEX_ARITH(bool)
KJIT_COMPLEX_ARITH(char)
KJIT_COMPLEX_ARITH(signed char)
KJIT_COMPLEX_ARITH(unsigned char)
KJIT_COMPLEX_ARITH(short)
KJIT_COMPLEX_ARITH(unsigned short)
KJIT_COMPLEX_ARITH(int)
KJIT_COMPLEX_ARITH(unsigned int)
KJIT_COMPLEX_ARITH(long)
KJIT_COMPLEX_ARITH(unsigned long)
KJIT_COMPLEX_ARITH(long long)
KJIT_COMPLEX_ARITH(unsigned long long)
KJIT_COMPLEX_ARITH(float)
KJIT_COMPLEX_ARITH(double)
#undef KJIT_COMPLEX_ARITH

template <bool B, typename R = void>
struct enable_if {};
template <typename R>
struct enable_if<true, R> {
  using type = R;
};

// Real math per precision (float: the f-suffixed functions; double: the plain ones).
namespace rm {
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float sin(float x) { return ::sinf(x); }
__device__ __forceinline__ double sin(double x) { return ::sin(x); }
__device__ __forceinline__ float cos(float x) { return ::cosf(x); }
__device__ __forceinline__ double cos(double x) { return ::cos(x); }
__device__ __forceinline__ float sinh(float x) { return ::sinhf(x); }
__device__ __forceinline__ double sinh(double x) { return ::sinh(x); }
__device__ __forceinline__ float cosh(float x) { return ::coshf(x); }
__device__ __forceinline__ double cosh(double x) { return ::cosh(x); }
__device__ __forceinline__ float hypot(float x, float y) { return ::hypotf(x, y); }
__device__ __forceinline__ double hypot(double x, double y) { return ::hypot(x, y); }
__device__ __forceinline__ float atan2(float y, float x) { return ::atan2f(y, x); }
__device__ __forceinline__ double atan2(double y, double x) { return ::atan2(y, x); }
__device__ __forceinline__ float fabs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double fabs(double x) { return ::fabs(x); }
__device__ __forceinline__ float copysign(float x, float y) { return ::copysignf(x, y); }
__device__ __forceinline__ double copysign(double x, double y) { return ::copysign(x, y); }
template <typename T>
__device__ __forceinline__ bool isnan(T x) {
  return x != x;
}
template <typename T>
__device__ __forceinline__ bool isinf(T x) {
  return !isnan(x) && isnan(x - x);
}
}  // namespace rm

template <typename T>
struct alignas(2 * sizeof(T)) complex {
  T re, im;

  __host__ __device__ constexpr complex() : re(0), im(0) {}
  __host__ __device__ constexpr complex(T r, T i) : re(r), im(i) {}
  // A real value (an input, a scalar, a literal, a real result of the expression) is (x, 0).
  template <typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
  __host__ __device__ constexpr complex(U r) : re(static_cast<T>(r)), im(0) {}
  // The other precision (complex64 <-> complex128).
  template <typename U>
  __host__ __device__ constexpr explicit complex(const complex<U>& o)
      : re(static_cast<T>(o.re)), im(static_cast<T>(o.im)) {}

  __host__ __device__ constexpr T real() const { return re; }
  __host__ __device__ constexpr T imag() const { return im; }
};

template <typename T>
struct is_complex {
  static constexpr bool value = false;
};
template <typename T>
struct is_complex<complex<T>> {
  static constexpr bool value = true;
};

// The real type of a compute type: T for complex<T>, the type itself otherwise.
template <typename T>
struct real_of {
  using type = T;
};
template <typename T>
struct real_of<complex<T>> {
  using type = T;
};

// ---- arithmetic ----------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ complex<T> operator+(const complex<T>& a) {
  return a;
}
template <typename T>
__device__ __forceinline__ complex<T> operator-(const complex<T>& a) {
  return complex<T>(-a.re, -a.im);
}
template <typename T>
__device__ __forceinline__ complex<T> operator+(const complex<T>& a, const complex<T>& b) {
  return complex<T>(a.re + b.re, a.im + b.im);
}
template <typename T>
__device__ __forceinline__ complex<T> operator-(const complex<T>& a, const complex<T>& b) {
  return complex<T>(a.re - b.re, a.im - b.im);
}
template <typename T>
__device__ __forceinline__ complex<T> operator*(const complex<T>& a, const complex<T>& b) {
  return complex<T>(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
// c10::complex's division (numpy's: Smith's scaling, and x / 0 a complex inf or NaN).
template <typename T>
__device__ __forceinline__ complex<T> operator/(const complex<T>& x, const complex<T>& y) {
  const T a = x.re, b = x.im, c = y.re, d = y.im;
  const T abs_c = rm::fabs(c), abs_d = rm::fabs(d);
  if (abs_c >= abs_d) {
    if (abs_c == T(0) && abs_d == T(0)) return complex<T>(a / abs_c, b / abs_d);
    const T rat = d / c;
    const T scl = T(1) / (c + d * rat);
    return complex<T>((a + b * rat) * scl, (b - a * rat) * scl);
  }
  const T rat = c / d;
  const T scl = T(1) / (d + c * rat);
  return complex<T>((a * rat + b) * scl, (b * rat - a) * scl);
}
// With a real value (a scalar, a literal): as c10::complex, the real value scales both parts.
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator+(const complex<T>& a, U b) {
  return complex<T>(a.re + T(b), a.im);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator+(U a, const complex<T>& b) {
  return complex<T>(T(a) + b.re, b.im);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator-(const complex<T>& a, U b) {
  return complex<T>(a.re - T(b), a.im);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator-(U a, const complex<T>& b) {
  return complex<T>(T(a) - b.re, -b.im);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator*(const complex<T>& a, U b) {
  return complex<T>(a.re * T(b), a.im * T(b));
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator*(U a, const complex<T>& b) {
  return complex<T>(T(a) * b.re, T(a) * b.im);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator/(const complex<T>& a, U b) {
  return complex<T>(a.re / T(b), a.im / T(b));
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> operator/(U a, const complex<T>& b) {
  return complex<T>(T(a)) / b;
}

template <typename T>
__device__ __forceinline__ bool operator==(const complex<T>& a, const complex<T>& b) {
  return a.re == b.re && a.im == b.im;
}
template <typename T>
__device__ __forceinline__ bool operator!=(const complex<T>& a, const complex<T>& b) {
  return !(a == b);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ bool operator==(const complex<T>& a, U b) {
  return a.re == T(b) && a.im == T(0);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ bool operator==(U a, const complex<T>& b) {
  return b == a;
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ bool operator!=(const complex<T>& a, U b) {
  return !(a == b);
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ bool operator!=(U a, const complex<T>& b) {
  return !(b == a);
}

// Complex numbers have no order: PyTorch refuses lt/gt/le/ge (and so max, min, clamp) for them too.
#define KJIT_COMPLEX_NO_ORDER(OP)                                                                                    \
  template <typename A, typename B, typename enable_if<is_complex<A>::value || is_complex<B>::value, int>::type = 0> \
  __device__ bool operator OP(const A&, const B&) {                                                                  \
    static_assert(always_false<A>::value, "kjit.elementwise: complex values have no order (operator " #OP            \
                                          "), as in PyTorch; compare real(z), imag(z) or abs(z) instead");           \
    return false;                                                                                                    \
  }
KJIT_COMPLEX_NO_ORDER(<)
KJIT_COMPLEX_NO_ORDER(>)
KJIT_COMPLEX_NO_ORDER(<=)
KJIT_COMPLEX_NO_ORDER(>=)
#undef KJIT_COMPLEX_NO_ORDER

// ---- functions -----------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T real(const complex<T>& z) {
  return z.re;
}
template <typename T>
__device__ __forceinline__ T imag(const complex<T>& z) {
  return z.im;
}
template <typename T>
__device__ __forceinline__ complex<T> conj(const complex<T>& z) {
  return complex<T>(z.re, -z.im);
}
template <typename T>
__device__ __forceinline__ T abs(const complex<T>& z) {
  return rm::hypot(z.re, z.im);
}
template <typename T>
__device__ __forceinline__ T angle(const complex<T>& z) {
  return rm::atan2(z.im, z.re);
}
template <typename T>
__device__ __forceinline__ T arg(const complex<T>& z) {
  return rm::atan2(z.im, z.re);
}
template <typename T>
__device__ __forceinline__ T norm(const complex<T>& z) {
  return z.re * z.re + z.im * z.im;
}
template <typename T>
__device__ __forceinline__ complex<T> polar(T r, T theta) {
  return complex<T>(r * rm::cos(theta), r * rm::sin(theta));
}
template <typename T>
__device__ __forceinline__ complex<T> square(const complex<T>& z) {
  return z * z;
}

template <typename T>
__device__ __forceinline__ complex<T> exp(const complex<T>& z) {
  if (z.im == T(0)) return complex<T>(rm::exp(z.re), z.im);  // exact for real arguments, as C99
  const T e = rm::exp(z.re);
  return complex<T>(e * rm::cos(z.im), e * rm::sin(z.im));
}
template <typename T>
__device__ __forceinline__ complex<T> log(const complex<T>& z) {
  return complex<T>(rm::log(abs(z)), arg(z));
}
template <typename T>
__device__ __forceinline__ complex<T> log2(const complex<T>& z) {
  const T k = T(1.44269504088896340736);  // 1 / ln 2
  const complex<T> l = log(z);
  return complex<T>(l.re * k, l.im * k);
}
template <typename T>
__device__ __forceinline__ complex<T> log10(const complex<T>& z) {
  const T k = T(0.434294481903251827651);  // 1 / ln 10
  const complex<T> l = log(z);
  return complex<T>(l.re * k, l.im * k);
}
// The principal square root, without overflow or cancellation (Kahan): the result's real part >= 0.
template <typename T>
__device__ __forceinline__ complex<T> sqrt(const complex<T>& z) {
  const T a = z.re, b = z.im;
  if (a == T(0) && b == T(0)) return complex<T>(T(0), b);
  if (rm::isinf(b)) return complex<T>(rm::fabs(b), b);
  const T t = rm::sqrt((rm::fabs(a) + abs(z)) * T(0.5));
  if (a >= T(0)) return complex<T>(t, b / (T(2) * t));
  return complex<T>(rm::fabs(b) / (T(2) * t), rm::copysign(t, b));
}
template <typename T>
__device__ __forceinline__ complex<T> reciprocal(const complex<T>& z) {
  // PyTorch's reciprocal (numpy's rules): NaN in either part or two infinite parts -> NaN; one infinite -> 0.
  const bool nan = rm::isnan(z.re) || rm::isnan(z.im);
  const bool inf_re = rm::isinf(z.re), inf_im = rm::isinf(z.im);
  if (nan || (inf_re && inf_im)) return complex<T>(z.re - z.re + z.im - z.im, z.re - z.re + z.im - z.im);
  if (inf_re || inf_im) return complex<T>(T(0), T(0));
  return complex<T>(T(1), T(0)) / z;
}
template <typename T>
__device__ __forceinline__ complex<T> rsqrt(const complex<T>& z) {
  return reciprocal(sqrt(z));
}
// z / |z| (0 for 0): torch.sgn.
template <typename T>
__device__ __forceinline__ complex<T> sgn(const complex<T>& z) {
  const T r = abs(z);
  return r == T(0) ? complex<T>(T(0), T(0)) : complex<T>(z.re / r, z.im / r);
}
template <typename T>
__device__ __forceinline__ complex<T> pow(const complex<T>& z, const complex<T>& w) {
  return exp(w * log(z));
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> pow(const complex<T>& z, U w) {
  return exp(complex<T>(w) * log(z));
}
template <typename T, typename U, typename enable_if<is_arith<U>::value, int>::type = 0>
__device__ __forceinline__ complex<T> pow(U z, const complex<T>& w) {
  return exp(w * log(complex<T>(z)));
}

template <typename T>
__device__ __forceinline__ complex<T> sinh(const complex<T>& z) {
  return complex<T>(rm::sinh(z.re) * rm::cos(z.im), rm::cosh(z.re) * rm::sin(z.im));
}
template <typename T>
__device__ __forceinline__ complex<T> cosh(const complex<T>& z) {
  return complex<T>(rm::cosh(z.re) * rm::cos(z.im), rm::sinh(z.re) * rm::sin(z.im));
}
template <typename T>
__device__ __forceinline__ complex<T> tanh(const complex<T>& z) {
  const T x = z.re, y = z.im;
  // For |x| past this, tanh(x + iy) is copysign(1, x) + i 4 sin(y) cos(y) e^{-2|x|} to the last bit (cosh
  // and sinh of 2x would overflow first).
  if (rm::fabs(x) > T(sizeof(T) == 4 ? 10 : 22)) {
    const T e = rm::exp(T(-2) * rm::fabs(x));
    return complex<T>(rm::copysign(T(1), x), T(4) * rm::sin(y) * rm::cos(y) * e);
  }
  const T d = rm::cosh(T(2) * x) + rm::cos(T(2) * y);
  return complex<T>(rm::sinh(T(2) * x) / d, rm::sin(T(2) * y) / d);
}
template <typename T>
__device__ __forceinline__ complex<T> sin(const complex<T>& z) {
  return complex<T>(rm::sin(z.re) * rm::cosh(z.im), rm::cos(z.re) * rm::sinh(z.im));
}
template <typename T>
__device__ __forceinline__ complex<T> cos(const complex<T>& z) {
  return complex<T>(rm::cos(z.re) * rm::cosh(z.im), -rm::sin(z.re) * rm::sinh(z.im));
}
// tan(z) = -i tanh(iz).
template <typename T>
__device__ __forceinline__ complex<T> tan(const complex<T>& z) {
  const complex<T> t = tanh(complex<T>(-z.im, z.re));
  return complex<T>(t.im, -t.re);
}

// Functions PyTorch has no complex form of, or that kjit does not provide for complex values: refused when
// the expression applies them to a complex value, with the alternative.
#define KJIT_COMPLEX_REFUSE(NAME, WHY)                                                             \
  template <typename T, typename... R>                                                             \
  __device__ complex<T> NAME(const complex<T>&, const R&...) {                                     \
    static_assert(always_false<T>::value, "kjit.elementwise: " #NAME " of a complex value: " WHY); \
    return complex<T>();                                                                           \
  }
#define KJIT_NOT_IN_TORCH "PyTorch has no complex form of it either; apply it to real(z), imag(z) or abs(z)"
KJIT_COMPLEX_REFUSE(floor, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(ceil, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(round, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(trunc, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(fmod, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(fmax, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(fmin, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(max, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(min, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(erf, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(erfc, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(lgamma, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(tgamma, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(atan2, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(hypot, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(cbrt, KJIT_NOT_IN_TORCH)
KJIT_COMPLEX_REFUSE(asin, "kjit does not provide it for complex values; compute it with torch.asin")
KJIT_COMPLEX_REFUSE(acos, "kjit does not provide it for complex values; compute it with torch.acos")
KJIT_COMPLEX_REFUSE(atan, "kjit does not provide it for complex values; compute it with torch.atan")
KJIT_COMPLEX_REFUSE(asinh, "kjit does not provide it for complex values; compute it with torch.asinh")
KJIT_COMPLEX_REFUSE(acosh, "kjit does not provide it for complex values; compute it with torch.acosh")
KJIT_COMPLEX_REFUSE(atanh, "kjit does not provide it for complex values; compute it with torch.atanh")
KJIT_COMPLEX_REFUSE(expm1, "kjit does not provide it for complex values; write exp(z) - 1 or use torch.expm1")
KJIT_COMPLEX_REFUSE(log1p, "kjit does not provide it for complex values; write log(1 + z) or use torch.log1p")
#undef KJIT_NOT_IN_TORCH
#undef KJIT_COMPLEX_REFUSE

}  // namespace kjit_complex

#endif  // KJIT_DETAIL_COMPLEX_CUH
