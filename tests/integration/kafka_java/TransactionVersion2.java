// Kafka's Java client (4.x) against a broker that finalizes transaction.version 2 (KIP-890 part 2): commit,
// abort, offsets in a transaction, an older producer fenced, epochs after every decision, and what a
// read_committed consumer sees. Compiled and run by tests/integration/test_kafka_transactions_v2.py, which
// checks the lines printed here: "epoch STEP N", "fenced CLASS", "offset N", "read VALUE".
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TransactionVersion2 {
    private static final int PARTITIONS = 3;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], transactionalId = args[2], group = args[3];
        Properties adminProperties = new Properties();
        adminProperties.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProperties)) {
            KafkaProducer<String, String> first = producer(bootstrap, transactionalId);
            first.initTransactions();
            epoch(admin, transactionalId, "init");
            write(first, topic, "commit1", true);
            epoch(admin, transactionalId, "commit1");
            write(first, topic, "aborted", false);
            epoch(admin, transactionalId, "abort");
            first.beginTransaction();
            send(first, topic, "commit2");
            first.sendOffsetsToTransaction(
                Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(5)), new ConsumerGroupMetadata(group));
            first.commitTransaction();
            epoch(admin, transactionalId, "commit2");

            KafkaProducer<String, String> second = producer(bootstrap, transactionalId);
            second.initTransactions();
            epoch(admin, transactionalId, "fence");
            try {
                first.beginTransaction();
                first.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
                first.commitTransaction();
                System.out.println("fenced none");
            } catch (ExecutionException error) {
                System.out.println("fenced " + error.getCause().getClass().getSimpleName());
            } catch (KafkaException error) {
                System.out.println("fenced " + error.getClass().getSimpleName());
            }
            first.close(Duration.ofSeconds(5));
            write(second, topic, "second", true);
            epoch(admin, transactionalId, "second");
            second.close(Duration.ofSeconds(5));

            OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                .get(new TopicPartition(topic, 0));
            System.out.println("offset " + (committed == null ? -1 : committed.offset()));
        }
        for (String value : readCommitted(bootstrap, topic)) {
            System.out.println("read " + value);
        }
    }

    private static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties properties = new Properties();
        properties.put("bootstrap.servers", bootstrap);
        properties.put("transactional.id", transactionalId);
        properties.put("key.serializer", StringSerializer.class.getName());
        properties.put("value.serializer", StringSerializer.class.getName());
        properties.put("max.block.ms", "30000");
        return new KafkaProducer<>(properties);
    }

    private static void send(KafkaProducer<String, String> producer, String topic, String prefix) {
        for (int number = 0; number < 2 * PARTITIONS; number++) {
            producer.send(new ProducerRecord<>(topic, number % PARTITIONS, null, prefix + "-" + number));
        }
    }

    private static void write(KafkaProducer<String, String> producer, String topic, String prefix, boolean commit) {
        producer.beginTransaction();
        send(producer, topic, prefix);
        producer.flush();
        if (commit) {
            producer.commitTransaction();
        } else {
            producer.abortTransaction();
        }
    }

    private static void epoch(Admin admin, String transactionalId, String step) throws Exception {
        TransactionDescription description =
            admin.describeTransactions(List.of(transactionalId)).description(transactionalId).get();
        System.out.println("epoch " + step + " " + description.producerEpoch() + " " + description.state());
    }

    private static List<String> readCommitted(String bootstrap, String topic) {
        Properties properties = new Properties();
        properties.put("bootstrap.servers", bootstrap);
        properties.put("isolation.level", "read_committed");
        properties.put("key.deserializer", StringDeserializer.class.getName());
        properties.put("value.deserializer", StringDeserializer.class.getName());
        List<TopicPartition> partitions = new ArrayList<>();
        for (int number = 0; number < PARTITIONS; number++) {
            partitions.add(new TopicPartition(topic, number));
        }
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(properties)) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline && !reached(consumer, ends)) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    values.add(record.value());
                }
            }
        }
        Collections.sort(values);
        return values;
    }

    private static boolean reached(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
            if (consumer.position(end.getKey()) < end.getValue()) {
                return false;
            }
        }
        return true;
    }
}
