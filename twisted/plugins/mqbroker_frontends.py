from mqbroker.protocols.frontends import LazyFrontEnd

native = LazyFrontEnd(name="native", config_key="native_port", builder="mqbroker.protocols.native.server.build_factory",
                      clients_route=True)
amqp = LazyFrontEnd(name="amqp", config_key="amqp_port", builder="mqbroker.protocols.amqp.server.build_factory")
mqtt = LazyFrontEnd(name="mqtt", config_key="mqtt_port", builder="mqbroker.protocols.mqtt.server.build_factory")
kafka = LazyFrontEnd(name="kafka", config_key="kafka_port", builder="mqbroker.protocols.kafka.server.build_factory",
                     clients_route=True)
