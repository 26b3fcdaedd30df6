/* Prints the layout of the insitu_adaptor.h structs and its enum values as JSON
 * (tests/test_capi.py compares them with its ctypes mirror and capi.py). C and C++. */
#include <stddef.h>
#include <stdio.h>

#include "insitu_adaptor.h"

#define OFF(T, m) printf("\"%s.%s\": %d, ", #T, #m, (int)offsetof(T, m))
#define SIZE(T) printf("\"sizeof %s\": %d, ", #T, (int)sizeof(T))
#define VAL(x) printf("\"%s\": %d, ", #x, (int)(x))

int main(void) {
    printf("{");
    SIZE(insitu_field); OFF(insitu_field, name); OFF(insitu_field, association); OFF(insitu_field, dtype);
    OFF(insitu_field, memory); OFF(insitu_field, device); OFF(insitu_field, layout); OFF(insitu_field, dims);
    OFF(insitu_field, strides); OFF(insitu_field, data);
    SIZE(insitu_domain); OFF(insitu_domain, domain_id); OFF(insitu_domain, dims); OFF(insitu_domain, origin);
    OFF(insitu_domain, spacing); OFF(insitu_domain, nfields); OFF(insitu_domain, fields);
    SIZE(insitu_mesh); OFF(insitu_mesh, ndomains); OFF(insitu_mesh, domains);
    SIZE(insitu_results_t); OFF(insitu_results_t, stop); OFF(insitu_results_t, nerrors);
    OFF(insitu_results_t, step); OFF(insitu_results_t, nparams);
    VAL(INSITU_OK); VAL(INSITU_ERR_ARGUMENT); VAL(INSITU_ERR_CONFIG); VAL(INSITU_ERR_MESH);
    VAL(INSITU_ERR_DEVICE_UNAVAILABLE); VAL(INSITU_ERR_NOT_INITIALIZED); VAL(INSITU_ERR_EXECUTE);
    VAL(INSITU_ERR_NOT_FOUND); VAL(INSITU_ERR_PYTHON);
    VAL(INSITU_FLOAT32); VAL(INSITU_FLOAT64); VAL(INSITU_INT8); VAL(INSITU_INT16); VAL(INSITU_INT32);
    VAL(INSITU_INT64); VAL(INSITU_UINT8); VAL(INSITU_UINT16); VAL(INSITU_UINT32); VAL(INSITU_UINT64);
    VAL(INSITU_MEMORY_HOST); VAL(INSITU_MEMORY_CUDA); VAL(INSITU_VERTEX); VAL(INSITU_ELEMENT);
    VAL(INSITU_LAYOUT_C); VAL(INSITU_LAYOUT_FORTRAN); VAL(INSITU_LAYOUT_STRIDED); VAL(INSITU_NAME_MAX);
    printf("\"language\": \"%s\"}\n",
#ifdef __cplusplus
           "C++"
#else
           "C"
#endif
    );
    return 0;
}
