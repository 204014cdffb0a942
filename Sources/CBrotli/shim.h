#ifndef SDUI_PROXY_CBROTLI_SHIM_H
#define SDUI_PROXY_CBROTLI_SHIM_H

#include <brotli/encode.h>
#include <brotli/decode.h>

#endif
