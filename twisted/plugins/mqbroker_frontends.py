from mqbroker.frontends import LazyFrontEnd

native = LazyFrontEnd(name="native", config_key="native_port", builder="mqbroker.protocols.native.server.build_factory")
