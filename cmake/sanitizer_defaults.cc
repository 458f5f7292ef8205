// Linked into every executable of a sanitizer build (gdt_target_defaults).
// UBSan findings stop the process. The vptr check is built recoverable
// (-fsanitize-recover=vptr) only so that a process a test runs out of file
// descriptors on purpose can say halt_on_error=0: that check reads the
// object through a pipe and, with no descriptor free, reports every type it
// has not met before as one with an invalid vptr. UBSAN_OPTIONS given in
// the environment is read after this and wins key by key.
extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1";
}
