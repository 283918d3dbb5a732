// The JDK's own locks under load, for the README's check of lockscope against JFR in the same
// run: a Hashtable (synchronized methods) shared by 2 threads, and an ArrayBlockingQueue (one
// ReentrantLock, two conditions) between 2 producers and 2 consumers.
//
//   java [-XX:StartFlightRecording=filename=R.jfr,settings=S.jfc] JdkLocks SECONDS
//
// At the end it prints "ops/s: X": the table operations and queue transfers per second.
import java.util.Hashtable;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.TimeUnit;

public class JdkLocks {
    public static void main(String[] a) throws Exception {
        double secs = Double.parseDouble(a[0]);
        long end = System.nanoTime() + (long) (secs * 1e9);
        Hashtable<Integer, Integer> table = new Hashtable<>();
        ArrayBlockingQueue<Integer> q = new ArrayBlockingQueue<>(64);
        long t0 = System.nanoTime();
        long[] ops = new long[6];
        Thread[] ts = new Thread[6];
        for (int i = 0; i < 2; i++) {
            final int me = i;
            ts[i] = new Thread(() -> {
                int k = 0;
                while (System.nanoTime() < end) { table.put(k++ & 1023, k); table.get(k & 1023); ops[me]++; }
            }, "table-" + i);
        }
        for (int i = 2; i < 4; i++) ts[i] = new Thread(() -> {
            try { int k = 0; while (System.nanoTime() < end) q.put(k++); } catch (InterruptedException e) { }
        }, "producer-" + i);
        for (int i = 4; i < 6; i++) {
            final int me = i;
            ts[i] = new Thread(() -> {
                try {
                    while (System.nanoTime() < end)
                        if (q.poll(1, TimeUnit.MILLISECONDS) != null) ops[me]++;
                } catch (InterruptedException e) { }
            }, "consumer-" + i);
        }
        for (Thread t : ts) t.start();
        for (Thread t : ts) t.join();
        long sum = 0;
        for (long o : ops) sum += o;
        System.out.printf("ops/s: %.1f%n", sum / ((System.nanoTime() - t0) / 1e9));
        System.exit(0);
    }
}
