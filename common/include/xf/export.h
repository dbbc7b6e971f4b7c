/* XF_API marks what libxf exports: the C API (xf.h) and the C++ API (translator.h, model.h,
 * error.h, the dtype names of dtype.h). xf is compiled with hidden visibility, so
 * everything else stays inside the library. Plain C so that xf.h can include it. */
#ifndef XF_EXPORT_H_
#define XF_EXPORT_H_

#define XF_API __attribute__((visibility("default")))

#endif /* XF_EXPORT_H_ */
