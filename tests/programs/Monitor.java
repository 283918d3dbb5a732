// THREADS threads enter one object's monitor (synchronized) for SECONDS:
// inside, HOLD_US of arithmetic; outside, WORK_US. A `synchronized` Java
// monitor, for lockscope's JVM test (tests/test_jvm.py).
//
//   java -XX:+DTraceMonitorProbes Monitor.java THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]
//
// Each second it prints "ops/s: X" and "monitor_wait: F": the threads' own
// clock of the share of their time spent waiting to enter the monitor
// (System.nanoTime before `synchronized` and first thing inside). Every
// 0.1 s it writes that share and the seconds waited to CLOCK_FILE when
// given ("share seconds", the file replaced whole): stopped at a window's
// end, the program leaves its clock to within 0.1 s of it.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

public class Monitor {
    static final class Counter { long value; }
    static final Counter COUNTER = new Counter();

    static void spin(long ns) {
        long end = System.nanoTime() + ns;
        while (System.nanoTime() < end) { }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        long hold = Long.parseLong(args[1]) * 1000, work = Long.parseLong(args[2]) * 1000;
        double secs = Double.parseDouble(args[3]);
        long[] ops = new long[n], waited = new long[n];
        long t0 = System.nanoTime(), end = t0 + (long) (secs * 1e9);
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++) {
            final int me = i;
            ts[i] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long before = System.nanoTime();
                    synchronized (COUNTER) {
                        waited[me] += System.nanoTime() - before;
                        spin(hold);
                        COUNTER.value++;
                    }
                    ops[me]++;
                    spin(work);
                }
            }, "worker-" + i);
            ts[i].setDaemon(true);
            ts[i].start();
        }
        for (int tick = 1; System.nanoTime() < end; tick++) {
            Thread.sleep(100);
            double wall = (System.nanoTime() - t0) / 1e9;
            long sum = 0, w = 0;
            for (int i = 0; i < n; i++) { sum += ops[i]; w += waited[i]; }
            double share = w / 1e9 / (n * wall);
            if (tick % 10 == 0) {
                System.out.printf("ops/s: %.1f%n", sum / wall);
                System.out.printf("monitor_wait: %.3f%n", share);
            }
            if (args.length > 4) {       // share, seconds waited: replaced whole (the program may be stopped)
                Path tmp = Path.of(args[4] + ".tmp");
                Files.writeString(tmp, String.format("%.4f %.4f%n", share, w / 1e9));
                Files.move(tmp, Path.of(args[4]), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            }
        }
    }
}
