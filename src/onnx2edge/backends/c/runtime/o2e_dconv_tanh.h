/* o2e_dconv_tanh.h - the tanh of the direct kernels' fused activation (kernels/conv/conv_direct.py).
 * Static C moved out of kernels/conv/conv_direct.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_DCONV_TANH_H
#define O2E_DCONV_TANH_H

static inline float o2e_dconv_tanh(float x)
{
  const float c = 7.90531110763549805f;
  const float v = x > c ? c : (x < -c ? -c : x), v2 = v * v;
  float p = v2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * v2 + -8.60467152213735e-11f;
  p = p * v2 + 5.12229709037114e-08f;
  p = p * v2 + 1.48572235717979e-05f;
  p = p * v2 + 6.37261928875436e-04f;
  p = p * v2 + 4.89352455891786e-03f;
  p = p * v;
  float q = v2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * v2 + 2.26843463243900e-03f;
  q = q * v2 + 4.89352518554385e-03f;
  {
    const float t = p / q;
    return (x < 0.0004f && x > -0.0004f) ? x : t;
  }
}

#endif /* O2E_DCONV_TANH_H */
