# cmake -DSOURCE_DIR=<repo> -P python_layers.cmake
# The Python binding's folders are layers (python/CMakeLists.txt), lowest first:
#   python/src/core/            the torch-free binding (kjit._core)
#   python/src/torch/           torch's adapters for user kernels (tensors, dtypes, streams, errors, profiler)
#   python/src/ops/runtime/     what every op uses (KJIT_OP, direct entries, checks, geometry, kernels, launch)
#   python/src/ops/elementwise/ kjit.elementwise's C++ side
#   python/src/ops/             the op families, one file each (they may use one another's headers)
#   python/src/torch_module.cpp kjit._C's entry, which binds them all
# A file includes (with "folder/file" paths from python/src, or a bare name of its own folder) only files of
# its own layer or of one below: the op runtime includes no family, torch/ nothing of ops/, and the folders
# form no loop. A violation is reported with its file and line, and the check fails.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "python_layers.cmake needs -DSOURCE_DIR=<the kjit source tree>")
endif()
set(src_root ${SOURCE_DIR}/python/src)
if(NOT IS_DIRECTORY ${src_root}/ops/runtime)
  message(FATAL_ERROR "no ${src_root}/ops/runtime: is SOURCE_DIR the kjit source tree?")
endif()

# The layer of a path relative to python/src (a file or a folder), in `out`.
function(layer_of rel out)
  if(rel MATCHES "^core/")
    set(r 0)
  elseif(rel MATCHES "^torch/")
    set(r 1)
  elseif(rel MATCHES "^ops/runtime/")
    set(r 2)
  elseif(rel MATCHES "^ops/elementwise/")
    set(r 3)
  elseif(rel MATCHES "^ops/[^/]+$")
    set(r 4)
  elseif(rel MATCHES "^[^/]+$")
    set(r 5)
  else()
    set(r -1)  # a folder that is not a layer yet
  endif()
  set(${out} ${r} PARENT_SCOPE)
endfunction()
set(names "core/;torch/;ops/runtime/;ops/elementwise/;ops/ (families);torch_module.cpp")

set(violations "")
file(GLOB_RECURSE sources RELATIVE ${src_root} ${src_root}/*.hpp ${src_root}/*.cpp)
foreach(rel ${sources})
  layer_of(${rel} own)
  if(own LESS 0)
    set(violations "${violations}\n  python/src/${rel}: in no layer (add its folder to tests/layering/python_layers.cmake)")
    continue()
  endif()
  get_filename_component(dir ${rel} DIRECTORY)
  file(STRINGS ${src_root}/${rel} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" header "${line}")
    if(header MATCHES "^(core|torch|ops)/")
      set(target ${header})
    elseif(NOT header MATCHES "/" AND EXISTS ${src_root}/${dir}/${header} AND dir)
      set(target ${dir}/${header})
    else()
      continue()  # kjit/..., a system or a third-party header
    endif()
    layer_of(${target} theirs)
    if(theirs GREATER own)
      list(GET names ${own} own_name)
      list(GET names ${theirs} their_name)
      set(violations "${violations}\n  python/src/${rel} (${own_name}): #include \"${header}\" (${their_name}, above it)")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "layering: these includes of python/src reach above their layer (core/ <- torch/ <- "
                      "ops/runtime/ <- ops/elementwise/ <- ops/ families <- torch_module.cpp):${violations}\n"
                      "Move what both need down a layer (what every op uses belongs in ops/runtime/), or pass it "
                      "in from above (as torch_module.cpp hands the op counters to torch/).")
endif()
message(STATUS "layering: python/src's folders include only their own layer or those below it")
