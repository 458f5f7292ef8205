// gdt-kv: the gang key-value store of the current gdt job, for shell and
// Python scripts. Everything lives in kv_cli.cc.
#include <cstdlib>
#include <iostream>

#include "common/version_flag.h"
#include "kv/kv_cli.h"

int main(int argc, char** argv) {
  if (gdt::PrintVersionIfAsked(argc, argv, "gdt-kv " GDT_VERSION, std::cout)) {
    return 0;
  }
  return gdt::kv::RunKvCli(argc, argv, std::getenv, std::cin, std::cout,
                           std::cerr);
}
