from twisted.application.service import ServiceMaker

mqbroker = ServiceMaker("mqbroker", "mqbroker.tap", "A partitioned, replicated commit-log message broker.", "mqbroker")
