# Developer shortcuts. `make demo`: broker + simulated MQTT devices + the Spark IoT job + a subscriber.
.PHONY: demo

demo:
	bash spark/jobs/demo.sh
