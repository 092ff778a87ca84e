#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
  return kjit::cli::run({argv + (argc > 0 ? 1 : 0), argv + argc}, std::cout, std::cerr);
}
