#include <windows.h>
/* Rust's standard library asks bcryptprimitives.dll for ProcessPrng at start; Wine 8 has no
   such DLL. This one answers through RtlGenRandom (advapi32's SystemFunction036). */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
