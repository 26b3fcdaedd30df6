// The same checks compiled as C++ (extern "C" linkage, no C-only constructs in the header).
#include "header_check.c"
