// A Rust std::sync::Mutex program with its own clock, for `lockscope
// confirm` (the Rust twin of confirm.c).
//
//     rustc -O -o confirm_rs confirm.rs
//     ./confirm_rs THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]
//
// Each thread loops: lock one global Mutex, spin HOLD_US, unlock; spin
// WORK_US outside it. Every 0.1 s it prints "ops: N" and, with CLOCK_FILE,
// appends "T_NS OPS HOLD_NS" there (CLOCK_MONOTONIC, operations, the time
// the lock was held in total, from lock's return to the guard's drop).
// Lock and unlock are inlined: confirm reaches them by the contended paths.
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

static LOCK: Mutex<u64> = Mutex::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static HELD_NS: AtomicU64 = AtomicU64::new(0);

fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {}
}

fn monotonic_ns() -> u64 {
    // Instant is CLOCK_MONOTONIC on Linux; read it the way the tools do
    let mut ts = [0i64; 2];
    extern "C" {
        fn clock_gettime(clk: i32, ts: *mut i64) -> i32;
    }
    unsafe { clock_gettime(1, ts.as_mut_ptr()) };
    (ts[0] as u64) * 1_000_000_000 + ts[1] as u64
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: confirm_rs THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]");
        std::process::exit(2);
    }
    let n: usize = a[1].parse().unwrap();
    let hold = Duration::from_micros(a[2].parse().unwrap());
    let work = Duration::from_micros(a[3].parse().unwrap());
    let secs: u64 = a[4].parse().unwrap();
    let mut clock = a.get(5).map(|p| File::create(p).expect("clock file"));
    for _ in 0..n {
        thread::spawn(move || loop {
            {
                let mut g = LOCK.lock().unwrap();
                let t0 = Instant::now();
                spin(hold);
                *g += 1;
                drop(g);
                HELD_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            OPS.fetch_add(1, Ordering::Relaxed);
            spin(work);
        });
    }
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(100));
        println!("ops: {}", OPS.load(Ordering::Relaxed));
        if let Some(f) = clock.as_mut() {
            writeln!(f, "{} {} {}", monotonic_ns(), OPS.load(Ordering::Relaxed), HELD_NS.load(Ordering::Relaxed)).unwrap();
        }
    }
    println!("ops/s: {:.1}", OPS.load(Ordering::Relaxed) as f64 / secs as f64);
}
