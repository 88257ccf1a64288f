# Appends `#include "proto/tensor_wire.h"` to the generated kernel_service.pb.h (HEADER), so
# that every translation unit that sees the message types also sees the serialization traits
# proto/tensor_wire.h specializes for them. Run by proto/CMakeLists.txt after protoc.
file(READ ${HEADER} text)
set(line "#include \"proto/tensor_wire.h\"  // added by proto/append_wire_include.cmake\n")
string(FIND "${text}" "${line}" found)
if(found EQUAL -1)
  file(APPEND ${HEADER} "\n${line}")
endif()
