// A Rust server of the usual shape (issue 16): N worker threads post to one
// ledger behind a std::sync::Mutex, hot in the program's own `post`
// function; two pool threads wait on a std::sync::Condvar for jobs that never
// come; the main thread joins the workers.
//
//     rustc -O -g -o ledger ledger.rs
//     ./ledger N [SECONDS] [arc|static|rwstatic]
//
// arc (default): the Mutex lives in an Arc (heap): named by `ledger::post`.
// static: the Mutex is the `static LEDGER`: named by its symbol.
// rwstatic: the `static TABLE: RwLock`, mostly written (`put`), sometimes
// read (`get`), so that writers and readers both wait: one lock, by symbol.
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

static LEDGER: Mutex<u64> = Mutex::new(0);

fn spin(n: u32) {
    for i in 0..n {
        black_box(i);
    }
}

#[inline(never)]
fn post(ledger: &Mutex<u64>, amount: u64) {
    let mut balance = ledger.lock().unwrap();
    spin(400); // the critical section
    *balance = balance.wrapping_add(amount);
}

static TABLE: RwLock<u64> = RwLock::new(0);

#[inline(never)]
fn put(amount: u64) {
    let mut v = TABLE.write().unwrap();
    spin(400);
    *v = v.wrapping_add(amount);
}

#[inline(never)]
fn get() -> u64 {
    let v = TABLE.read().unwrap();
    spin(400);
    *v
}

struct Pool {
    jobs: Mutex<(VecDeque<Box<dyn FnOnce() + Send>>, bool)>,
    ready: Condvar,
}

fn pool_thread(pool: Arc<Pool>) {
    let mut q = pool.jobs.lock().unwrap();
    loop {
        while q.0.is_empty() && !q.1 {
            q = pool.ready.wait(q).unwrap();
        }
        if q.1 {
            return;
        }
        if let Some(job) = q.0.pop_front() {
            drop(q);
            job();
            q = pool.jobs.lock().unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let seconds: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1e9);
    let mode = args.get(3).map(String::as_str).unwrap_or("arc").to_string();
    let on_heap = mode == "arc";
    let rw = mode == "rwstatic";
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);

    let pool = Arc::new(Pool { jobs: Mutex::new((VecDeque::new(), false)), ready: Condvar::new() });
    let bg: Vec<_> = (0..2)
        .map(|i| {
            let p = Arc::clone(&pool);
            thread::Builder::new().name(format!("bg-{i}")).spawn(move || pool_thread(p)).unwrap()
        })
        .collect();

    let heap_ledger = Arc::new(Mutex::new(0u64));
    let workers: Vec<_> = (0..n)
        .map(|t| {
            let ledger = Arc::clone(&heap_ledger);
            thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn(move || {
                    let lk: &Mutex<u64> = if on_heap { &ledger } else { &LEDGER };
                    let mut ops = 0u64;
                    while Instant::now() < deadline {
                        for i in 0..256 {
                            if !rw {
                                post(lk, t as u64 + i);
                            } else if i % 4 == 3 {
                                black_box(get());
                            } else {
                                put(t as u64 + i);
                            }
                            spin(400); // work outside the lock
                        }
                        ops += 256;
                    }
                    ops
                })
                .unwrap()
        })
        .collect();
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    pool.jobs.lock().unwrap().1 = true;
    pool.ready.notify_all();
    for b in bg {
        b.join().unwrap();
    }
    println!("ops/s: {:.0} balance {}", total as f64 / seconds, *heap_ledger.lock().unwrap() + *LEDGER.lock().unwrap() + *TABLE.read().unwrap());
}
