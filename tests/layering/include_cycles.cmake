# cmake -DSOURCE_DIR=<repo> -P include_cycles.cmake
# The include graph of base/, cache/ and engine/ (engine/cli/ too) has no loop. A node is one concept: a
# header and the source of the same name (cache/include/kjit/cache/trust.hpp and cache/src/trust.cpp are
# cache/src/trust), so a loop through sources counts: a.cpp including b.hpp, b.cpp including a.hpp. Each
# #include "..." that names a header of these folders (kjit/..., or a file beside the includer) is an
# edge. A loop is reported as its chain of includes (the file and its #include line), and the check fails.
#
# KNOWN_EDGES are the includes of a loop kjit has not broken yet, left out of the graph: each with why.
# The check fails, too, when one of them is no longer in the code (take it out of the list then).
cmake_minimum_required(VERSION 3.22)  # the policies of a script run by -P (IN_LIST)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "include_cycles.cmake needs -DSOURCE_DIR=<the kjit source tree>")
endif()

# "<includer node> -> <included node>" (nodes as below: the path of the source without .cpp).
set(KNOWN_EDGES
  # CompileOptions' rules (validate, canonical, nvrtc_flags) derive from its field table, which reads and
  # writes CompileOptions; and settings.cpp checks KJIT_LIBRARY_FAST_COMPILE against the table's levels,
  # which CompileOptions::library() reads back. Breaking it moves CompileOptions' members, which the
  # built-in ops (python/src/ops) call.
  "engine/src/compile_options -> engine/src/compile_option_fields"
  "engine/src/compile_options -> engine/src/settings"
)

# The node of a file: its path under SOURCE_DIR without the extension, a public header under the
# source's folder (<layer>/include/kjit[/cache]/x.hpp -> <layer>/src/x).
function(node_of file out)
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
  string(REGEX REPLACE "\\.(hpp|cpp)$" "" rel "${rel}")
  string(REGEX REPLACE "^([a-z]+)/include/kjit/(cache/)?" "\\1/src/" rel "${rel}")
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

function(var_of node out)
  string(MAKE_C_IDENTIFIER "${node}" id)
  set(${out} "${id}" PARENT_SCOPE)
endfunction()

set(sources "")
foreach(layer base cache engine)
  file(GLOB_RECURSE found ${SOURCE_DIR}/${layer}/*.hpp ${SOURCE_DIR}/${layer}/*.cpp)
  if(NOT found)
    message(FATAL_ERROR "no sources under ${SOURCE_DIR}/${layer}: is SOURCE_DIR the kjit source tree?")
  endif()
  list(APPEND sources ${found})
endforeach()

set(nodes "")
set(known_seen "")
foreach(src ${sources})
  node_of(${src} from)
  var_of("${from}" from_var)
  list(APPEND nodes "${from}")
  get_filename_component(dir ${src} DIRECTORY)
  file(RELATIVE_PATH src_rel ${SOURCE_DIR} ${src})
  file(STRINGS ${src} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" header "${line}")
    set(target "")
    foreach(candidate ${dir}/${header} ${SOURCE_DIR}/base/include/${header} ${SOURCE_DIR}/cache/include/${header}
                      ${SOURCE_DIR}/engine/include/${header})
      if(EXISTS ${candidate} AND NOT target)
        set(target ${candidate})
      endif()
    endforeach()
    if(NOT target)
      continue()  # a header of another folder (CUDA, nlohmann, ...): not in the graph
    endif()
    node_of(${target} to)
    if(to STREQUAL from OR NOT to MATCHES "^(base|cache|engine)/")
      continue()
    endif()
    if("${from} -> ${to}" IN_LIST KNOWN_EDGES)
      list(APPEND known_seen "${from} -> ${to}")
      continue()
    endif()
    var_of("${to}" to_var)
    list(APPEND edges_${from_var} "${to}")
    list(APPEND why_${from_var}_${to_var} "${src_rel}: #include \"${header}\"")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES nodes)

foreach(edge ${KNOWN_EDGES})
  if(NOT edge IN_LIST known_seen)
    message(FATAL_ERROR "include_cycles.cmake: the known include ${edge} is no longer in the code: take it out of "
                        "KNOWN_EDGES, so that it cannot come back unnoticed")
  endif()
endforeach()

# Takes out, round after round, every node whose includes all lie in nodes taken out already: what is
# left after the last round lies on a loop or includes one.
set(left ${nodes})
set(changed TRUE)
while(changed)
  set(changed FALSE)
  set(next "")
  foreach(n ${left})
    var_of("${n}" v)
    set(open FALSE)
    foreach(to ${edges_${v}})
      if(to IN_LIST left)
        set(open TRUE)
        break()
      endif()
    endforeach()
    if(open)
      list(APPEND next "${n}")
    else()
      set(changed TRUE)
    endif()
  endforeach()
  set(left ${next})
endwhile()

if(left)
  # Every node left includes another node left: walking such includes from any of them comes back to a
  # node already walked, and the walk from there is a loop.
  list(GET left 0 at)
  set(walk "")
  while(NOT at IN_LIST walk)
    list(APPEND walk "${at}")
    var_of("${at}" v)
    foreach(to ${edges_${v}})
      if(to IN_LIST left)
        set(at "${to}")
        break()
      endif()
    endforeach()
  endwhile()
  list(FIND walk "${at}" first)
  list(SUBLIST walk ${first} -1 loop)
  list(APPEND loop "${at}")
  set(report "")
  set(prev "")
  foreach(n ${loop})
    if(prev)
      var_of("${prev}" pv)
      var_of("${n}" nv)
      list(GET why_${pv}_${nv} 0 why)
      set(report "${report}\n  ${why}")
    endif()
    set(prev "${n}")
  endforeach()
  list(JOIN loop " -> " names)
  message(FATAL_ERROR "include loop: ${names}:${report}\n"
                      "Move what the lower file needs into a header of its own (one concept per file) that "
                      "neither includes the other, or pass it in; see tests/layering/include_cycles.cmake.")
endif()
list(LENGTH nodes count)
message(STATUS "include_cycles: the ${count} headers and sources (one node each pair) of base/, cache/ and engine/ include each other in no loop")
