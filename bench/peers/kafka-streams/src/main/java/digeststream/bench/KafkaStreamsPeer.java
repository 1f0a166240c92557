package digeststream.bench;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.util.Utf8;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.state.SessionStore;

/**
 * The Kafka Streams peer of digest-stream's catch-up bench: what a Kafka user would write instead.
 *
 * <p>Events (key = timeline, value = a plain Avro Event, no registry framing) are decoded, grouped
 * by timeline into session windows with an inactivity gap, and aggregated into a digest: a record
 * count followed by every record (id, timestamp, payload). {@code suppress(untilWindowCloses)}
 * holds each session until stream time passes its end plus the gap, then emits one digest per
 * session to the output topic. State lives in RocksDB (the default) with changelog topics (the
 * default), so the application is as fault tolerant as a user would deploy it.
 *
 * <pre>
 * java -jar target/kstreams-peer.jar --bootstrap=H:P --input=T --output=T --application-id=ID
 *     --state-dir=DIR --schema=event.avsc --guarantee=at-least-once|exactly-once
 *     [--gap-ms=10000] [--commit-ms=100]
 * </pre>
 *
 * <p>Runs until SIGTERM (the bench stops it by pid once the group's committed offsets reach the
 * end of the input); exits 1 if the streams client fails.
 */
public final class KafkaStreamsPeer {
  private KafkaStreamsPeer() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = parse(argv);
    Schema schema = new Schema.Parser().parse(new File(args.get("schema")));
    Duration gap = Duration.ofMillis(Long.parseLong(args.getOrDefault("gap-ms", "10000")));

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args.get("input"), Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .mapValues(new EventDecoder(schema)::entry)
        .groupByKey()
        // No grace: the window closes at its end plus the gap, so one later event per
        // partition (the bench's closer) closes every session of that partition.
        .windowedBy(SessionWindows.ofInactivityGapWithNoGrace(gap))
        .aggregate(
            () -> new byte[Integer.BYTES],
            (timeline, entry, digest) -> Digest.append(digest, entry),
            (timeline, left, right) -> Digest.merge(left, right),
            Materialized.<String, byte[], SessionStore<Bytes, byte[]>>as("digests")
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.ByteArray()))
        // Unbounded: the buffer never drops or fails; the bench's backlog fits the heap.
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        // Merged-away sessions leave tombstones; only the final digests go out.
        .filter((window, digest) -> digest != null)
        .map((window, digest) -> KeyValue.pair(window.key(), digest))
        .to(args.get("output"), Produced.with(Serdes.String(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(builder.build(), config(args));
    CountDownLatch stopped = new CountDownLatch(1);
    boolean[] failed = {false};
    streams.setUncaughtExceptionHandler(
        error -> {
          error.printStackTrace();
          failed[0] = true;
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            stopped.countDown();
          }
        });
    // SIGTERM from the bench: close cleanly (commit, release the group) before the JVM exits.
    Thread hook = new Thread(() -> streams.close(Duration.ofSeconds(10)));
    Runtime.getRuntime().addShutdownHook(hook);
    streams.start();
    stopped.await();
    if (failed[0]) {
      streams.close(Duration.ofSeconds(10));
      System.exit(1);
    }
  }

  private static Properties config(Map<String, String> args) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
    String guarantee = args.get("guarantee");
    props.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        switch (guarantee) {
          case "at-least-once" -> StreamsConfig.AT_LEAST_ONCE;
          case "exactly-once" -> StreamsConfig.EXACTLY_ONCE_V2;
          default -> throw new IllegalArgumentException("--guarantee: " + guarantee);
        });
    // The at-least-once default (30 s) would make "committed offsets reach the end" a 30 s
    // step function; 100 ms is the exactly-once default, so both variants commit alike.
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.getOrDefault("commit-ms", "100"));
    // One stream thread, like digest-stream's one ingest loop; the box has two cores.
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    return props;
  }

  private static Map<String, String> parse(String[] argv) {
    Map<String, String> args = new HashMap<>();
    for (String arg : argv) {
      int eq = arg.indexOf('=');
      if (!arg.startsWith("--") || eq < 0) {
        throw new IllegalArgumentException("expected --name=value, got " + arg);
      }
      args.put(arg.substring(2, eq), arg.substring(eq + 1));
    }
    for (String name :
        new String[] {"bootstrap", "input", "output", "application-id", "state-dir", "schema",
          "guarantee"}) {
      if (!args.containsKey(name)) {
        throw new IllegalArgumentException("missing --" + name + "=...");
      }
    }
    return args;
  }

  /** Plain Avro Event bytes to one digest entry; one decoder per stream thread (reused). */
  static final class EventDecoder {
    private final GenericDatumReader<GenericRecord> reader;
    private final ThreadLocal<BinaryDecoder> decoder = new ThreadLocal<>();
    private final ThreadLocal<GenericRecord> reuse = new ThreadLocal<>();

    EventDecoder(Schema schema) {
      this.reader = new GenericDatumReader<>(schema);
    }

    byte[] entry(byte[] value) {
      BinaryDecoder in = DecoderFactory.get().binaryDecoder(value, decoder.get());
      decoder.set(in);
      GenericRecord event;
      try {
        event = reader.read(reuse.get(), in);
      } catch (IOException error) {
        throw new IllegalStateException("not an Avro Event", error);
      }
      reuse.set(event);
      Utf8 id = (Utf8) event.get("id");
      ByteBuffer payload = (ByteBuffer) event.get("payload");
      return Digest.entry(id, (Long) event.get("timestamp"), payload);
    }
  }

  /**
   * A digest as one byte array: [int count] then per record [int id length][id][long
   * timestamp][int payload length][payload]. Kafka Streams stores an aggregate serialised
   * (cache, RocksDB, changelog), so a flat byte array is the cheapest form it can take: no
   * serde work beyond the copy that appending implies.
   */
  static final class Digest {
    private Digest() {}

    static byte[] entry(Utf8 id, long timestamp, ByteBuffer payload) {
      ByteBuffer out =
          ByteBuffer.allocate(Integer.BYTES * 2 + Long.BYTES + id.getByteLength()
              + payload.remaining());
      out.putInt(id.getByteLength()).put(id.getBytes(), 0, id.getByteLength());
      out.putLong(timestamp).putInt(payload.remaining()).put(payload.duplicate());
      return out.array();
    }

    static byte[] append(byte[] digest, byte[] entry) {
      byte[] out = new byte[digest.length + entry.length];
      System.arraycopy(digest, 0, out, 0, digest.length);
      System.arraycopy(entry, 0, out, digest.length, entry.length);
      ByteBuffer.wrap(out).putInt(0, ByteBuffer.wrap(digest).getInt(0) + 1);
      return out;
    }

    static byte[] merge(byte[] left, byte[] right) {
      byte[] out = new byte[left.length + right.length - Integer.BYTES];
      System.arraycopy(left, 0, out, 0, left.length);
      System.arraycopy(right, Integer.BYTES, out, left.length, right.length - Integer.BYTES);
      int count = ByteBuffer.wrap(left).getInt(0) + ByteBuffer.wrap(right).getInt(0);
      ByteBuffer.wrap(out).putInt(0, count);
      return out;
    }
  }
}
