# Fails when MODULE defines libstdc++'s own symbols (the C++ runtime linked in statically).
# Usage: cmake -DMODULE=path/to/_C.so -DNM=nm -P check_shared_libstdcxx.cmake
execute_process(COMMAND ${NM} -D --defined-only ${MODULE} OUTPUT_VARIABLE _syms RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(WARNING "kjit: could not inspect ${MODULE} with ${NM}; skipping the libstdc++ check")
  return()
endif()
# std::locale::classic() and std::ios_base::Init live in libstdc++.so; a module never defines them.
if(_syms MATCHES "_ZNSt6locale7classicEv" OR _syms MATCHES "_ZNSt8ios_base4InitC1Ev")
  message(FATAL_ERROR
    "kjit: ${MODULE} contains a static copy of libstdc++ (it defines std::locale::classic). Inside "
    "a PyTorch process that crashes in std::locale / iostreams. Build with a compiler that links the "
    "shared libstdc++ (e.g. CXX=/usr/bin/g++ pip install --no-build-isolation .).")
endif()
