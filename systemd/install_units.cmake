# Run by `cmake --install` (systemd/CMakeLists.txt): configures both unit files with the paths
# under the prefix given at install time (CMAKE_INSTALL_PREFIX there is --prefix when given)
# and installs them. Relative directories are under that prefix; absolute ones stay.
foreach(d BINDIR LIBDIR CONFIG_DIR DEST)
  if(IS_ABSOLUTE "${AGENTD_UNIT_${d}_REL}")
    set(full_${d} "${AGENTD_UNIT_${d}_REL}")
  else()
    set(full_${d} "${CMAKE_INSTALL_PREFIX}/${AGENTD_UNIT_${d}_REL}")
  endif()
endforeach()
set(AGENTD_UNIT_BINDIR "${full_BINDIR}")
set(AGENTD_UNIT_PLUGIN_DIR "${full_LIBDIR}/agentd/plugins")
set(AGENTD_CONFIG_DIR "${full_CONFIG_DIR}")
foreach(unit as_server.service as_server@.service agentd-gateway.service)
  configure_file(${AGENTD_UNIT_SOURCE_DIR}/${unit}.in ${AGENTD_UNIT_WORK_DIR}/${unit} @ONLY)
endforeach()
file(INSTALL ${AGENTD_UNIT_WORK_DIR}/as_server.service ${AGENTD_UNIT_WORK_DIR}/as_server@.service
     ${AGENTD_UNIT_WORK_DIR}/agentd-gateway.service DESTINATION "${full_DEST}" TYPE FILE)
