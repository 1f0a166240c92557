package digeststream.bench;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.util.Utf8;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.SessionStore;

/**
 * The Kafka Streams peer of digest-stream's catch-up bench: what a Kafka user would write instead,
 * configured as a user would deploy it.
 *
 * <p>Events (key = timeline, value = a plain Avro Event, no registry framing) are decoded, grouped
 * by timeline into session windows with an inactivity gap, and aggregated into a digest: a record
 * count followed by every record (id, timestamp, payload). {@code suppress(untilWindowCloses)}
 * holds each session until stream time passes its end plus the gap, then emits one digest per
 * session to the output topic. Event time is the Avro event's own {@code timestamp} (a
 * TimestampExtractor), not the broker's CreateTime. State lives in RocksDB (the default) with
 * changelog topics (the default), so the application is as fault tolerant as a user would deploy
 * it; the record cache in front of it is sized by {@code --cache-bytes} (the working set). The
 * commit interval is Kafka's default for the guarantee (30 s at-least-once, 100 ms
 * exactly-once): a record keyed {@link #CLOSER} (the bench's last event per partition) asks for
 * a commit from the application ({@code context.commit()}), so the end of a backlog is committed
 * when it is reached, not at the next interval. {@code --threads} sets {@code
 * num.stream.threads} (1 by default): the input's partitions (tasks) are shared among them.
 *
 * <pre>
 * java -Xms2g -Xmx2g -XX:+UseG1GC -jar target/kstreams-peer.jar --bootstrap=H:P --input=T
 *     --output=T --application-id=ID --state-dir=DIR --schema=event.avsc
 *     --guarantee=at-least-once|exactly-once [--gap-ms=10000] [--cache-bytes=134217728]
 *     [--threads=1]
 * </pre>
 *
 * <p>Prints {@code running after N records} on stdout when the client first reaches RUNNING
 * (every task restored and processing; the first tasks ready may have processed N records before
 * the last one is): the bench times its steady rate from there. Runs until SIGTERM (the bench
 * stops it by pid once the group's committed offsets reach the end of the input); exits 1 if
 * the streams client fails.
 */
public final class KafkaStreamsPeer {
  /** The key of the bench's closing events: one per partition, after the backlog. */
  static final String CLOSER = "closer";

  private KafkaStreamsPeer() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = parse(argv);
    Schema schema = new Schema.Parser().parse(new File(args.get("schema")));
    Duration gap = Duration.ofMillis(Long.parseLong(args.getOrDefault("gap-ms", "10000")));

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(
            args.get("input"),
            Consumed.with(Serdes.String(), Serdes.ByteArray())
                .withTimestampExtractor(new EventTime()))
        // processValues keeps the key, so groupByKey needs no repartition topic.
        .processValues(() -> new Decode(schema))
        .groupByKey()
        // No grace: the window closes at its end plus the gap, so one later event per
        // partition (the bench's closer) closes every session of that partition.
        .windowedBy(SessionWindows.ofInactivityGapWithNoGrace(gap))
        .aggregate(
            () -> Digest.EMPTY,
            (timeline, one, digest) -> Digest.merge(digest, one),
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
    AtomicBoolean running = new AtomicBoolean();
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING && running.compareAndSet(false, true)) {
            System.out.println("running after " + Decode.PROCESSED.get() + " records");
            System.out.flush();
          }
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
    // No commit.interval.ms: Kafka's default for the guarantee. The bench's closers ask for
    // the last commit (Decode), so ending a run needs no short interval.
    // The record cache (10 MB by default) sized to the working set, as a user sizes it: each
    // commit or eviction flushes it into RocksDB, the changelog and the suppress buffer.
    props.put(
        StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG,
        Long.parseLong(args.getOrDefault("cache-bytes", String.valueOf(128L << 20))));
    // One stream thread by default, like one digest-stream process's one ingest loop;
    // --threads=2 runs against two digest-stream processes (one per core of the bench's box).
    // The record cache above is the whole client's, shared out among its threads.
    int threads = Integer.parseInt(args.getOrDefault("threads", "1"));
    if (threads < 1) {
      throw new IllegalArgumentException("--threads: at least 1, got " + threads);
    }
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
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

  /**
   * Event time: the Avro event's own {@code timestamp} (its second field, after the id). One
   * instance serves every stream thread, so each thread reuses a decoder of its own: a shared one
   * read another thread's record under {@code --threads=2} (wrong timestamps, records dropped as
   * late).
   */
  static final class EventTime implements TimestampExtractor {
    private final ThreadLocal<BinaryDecoder> decoders = new ThreadLocal<>();

    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      BinaryDecoder decoder =
          DecoderFactory.get().binaryDecoder((byte[]) record.value(), decoders.get());
      decoders.set(decoder);
      try {
        decoder.skipString();
        return decoder.readLong();
      } catch (IOException error) {
        throw new IllegalStateException("not an Avro Event", error);
      }
    }
  }

  /**
   * Plain Avro Event bytes to a one-record digest; a closer asks for a commit. One instance per
   * task, so the decoder and the record are reused without sharing.
   */
  static final class Decode implements FixedKeyProcessor<String, byte[], byte[]> {
    /** Records processed by every task: the bench's steady rate starts after those. */
    static final AtomicLong PROCESSED = new AtomicLong();
    private final GenericDatumReader<GenericRecord> reader;
    private FixedKeyProcessorContext<String, byte[]> context;
    private BinaryDecoder decoder;
    private GenericRecord event;

    Decode(Schema schema) {
      this.reader = new GenericDatumReader<>(schema);
    }

    @Override
    public void init(FixedKeyProcessorContext<String, byte[]> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<String, byte[]> record) {
      PROCESSED.incrementAndGet();
      decoder = DecoderFactory.get().binaryDecoder(record.value(), decoder);
      try {
        event = reader.read(event, decoder);
      } catch (IOException error) {
        throw new IllegalStateException("not an Avro Event", error);
      }
      Utf8 id = (Utf8) event.get("id");
      ByteBuffer payload = (ByteBuffer) event.get("payload");
      context.forward(record.withValue(Digest.one(id, (Long) event.get("timestamp"), payload)));
      if (CLOSER.equals(record.key())) {
        context.commit(); // the end of this partition's backlog: commit now, not in 30 s
      }
    }
  }

  /**
   * A digest as one byte array: [int count] then per record [int id length][id][long
   * timestamp][int payload length][payload]. Kafka Streams stores an aggregate serialised
   * (cache, RocksDB, changelog), so a flat byte array is the cheapest form it can take: no
   * serde work beyond the copy that appending implies. The aggregate starts {@link #EMPTY} and
   * each event arrives as a one-record digest, so an update is one merge: a session's first
   * event is kept as it is, every later one costs one copy of the digest.
   */
  static final class Digest {
    /** The initial aggregate: no records (and no bytes to copy). Never written to. */
    static final byte[] EMPTY = new byte[0];

    private Digest() {}

    static byte[] one(Utf8 id, long timestamp, ByteBuffer payload) {
      ByteBuffer out =
          ByteBuffer.allocate(Integer.BYTES * 3 + Long.BYTES + id.getByteLength()
              + payload.remaining());
      out.putInt(1).putInt(id.getByteLength()).put(id.getBytes(), 0, id.getByteLength());
      out.putLong(timestamp).putInt(payload.remaining()).put(payload.duplicate());
      return out.array();
    }

    /**
     * Both sides' records in one new array; an empty side returns the other as it is (Kafka
     * Streams merges every update's initial value with the stored session before aggregating).
     */
    static byte[] merge(byte[] left, byte[] right) {
      if (left.length == 0) {
        return right;
      }
      if (right.length == 0) {
        return left;
      }
      byte[] out = new byte[left.length + right.length - Integer.BYTES];
      System.arraycopy(left, 0, out, 0, left.length);
      System.arraycopy(right, Integer.BYTES, out, left.length, right.length - Integer.BYTES);
      int count = ByteBuffer.wrap(left).getInt(0) + ByteBuffer.wrap(right).getInt(0);
      ByteBuffer.wrap(out).putInt(0, count);
      return out;
    }
  }
}
