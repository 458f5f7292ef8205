// Linked into our executables that may initialise CUDA under AddressSanitizer
// (never into a library): ASan's protected shadow gap overlaps the address
// range the CUDA driver maps, so cuInit fails with "out of memory" unless
// the gap is left unprotected. Users can still override via ASAN_OPTIONS.
extern "C" const char* __asan_default_options() {
  return "protect_shadow_gap=0";
}
