// THREADS threads take one java.util.concurrent ReentrantLock for SECONDS:
// held, HOLD_US of arithmetic; outside, WORK_US. A j.u.c. lock, whose
// waiters park (LockSupport.park: the JVM's Parker, a pthread condition
// variable), beside an idle pool of 4 threads parked in
// LinkedBlockingQueue.take() (the same park, waiting for work), for
// lockscope's JVM test (tests/test_jvm.py).
//
//   java Parking THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]
//
// Each second it prints "ops/s: X" and "lock_wait: F": the threads' own
// clock of the share of their time spent in lock() (System.nanoTime before
// and after). Every 0.1 s it writes that share and the seconds waited to
// CLOCK_FILE when given ("share seconds", the file replaced whole):
// stopped at a window's end, the program leaves its clock to within 0.1 s
// of it.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

public class Parking {
    static final ReentrantLock LOCK = new ReentrantLock();
    static long value;

    static void spin(long ns) {
        long end = System.nanoTime() + ns;
        while (System.nanoTime() < end) { }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        long hold = Long.parseLong(args[1]) * 1000, work = Long.parseLong(args[2]) * 1000;
        double secs = Double.parseDouble(args[3]);
        long[] ops = new long[n], waited = new long[n];
        ThreadPoolExecutor pool = new ThreadPoolExecutor(4, 4, 1, TimeUnit.HOURS, new LinkedBlockingQueue<>());
        pool.prestartAllCoreThreads();
        long t0 = System.nanoTime(), end = t0 + (long) (secs * 1e9);
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++) {
            final int me = i;
            ts[i] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long before = System.nanoTime();
                    LOCK.lock();
                    try {
                        waited[me] += System.nanoTime() - before;
                        spin(hold);
                        value++;
                    } finally {
                        LOCK.unlock();
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
                System.out.printf("lock_wait: %.3f%n", share);
            }
            if (args.length > 4) {       // share, seconds waited: replaced whole (the program may be stopped)
                Path tmp = Path.of(args[4] + ".tmp");
                Files.writeString(tmp, String.format("%.4f %.4f%n", share, w / 1e9));
                Files.move(tmp, Path.of(args[4]), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            }
        }
        pool.shutdownNow();
    }
}
