// gdt-kv: the gang key-value store of the current gdt job, for shell and
// Python scripts. Everything lives in kv_cli.cc.
#include <cstdlib>
#include <iostream>

#include "kv/kv_cli.h"

int main(int argc, char** argv) {
  return gdt::kv::RunKvCli(argc, argv, std::getenv, std::cin, std::cout,
                           std::cerr);
}
