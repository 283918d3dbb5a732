// A C++ server of the usual shape (issue 16): N worker threads deposit into
// one account whose std::mutex is a member of a heap object, hot in
// bank::Account::deposit(long); two pool threads wait on a
// std::condition_variable for work that never comes; the main thread joins
// the workers. lockscope must name the hot mutex after the program's method,
// demangled, and call neither the pool's wait nor the join a lock.
//
//     g++ -O2 -g -pthread -o bank bank.cpp
//     ./bank N [SECONDS]        runs until killed without SECONDS
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bank {

static void spin(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

class Account {
public:
	__attribute__((noinline)) void deposit(long amount)
	{
		std::lock_guard<std::mutex> guard(mu_);
		spin(400);                       // the critical section
		balance_ += amount;
	}
	long balance()
	{
		std::lock_guard<std::mutex> guard(mu_);
		return balance_;
	}

private:
	std::mutex mu_;
	long balance_ = 0;
};

// A background pool: its threads wait on a condition variable for jobs.
class Pool {
public:
	explicit Pool(int n)
	{
		for (int i = 0; i < n; i++)
			threads_.emplace_back([this, i] { run(i); });
	}
	~Pool()
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			stopping_ = true;
		}
		cv_.notify_all();
		for (auto &t : threads_)
			t.join();
	}

private:
	void run(int i)
	{
		pthread_setname_np(pthread_self(), ("bg-" + std::to_string(i)).c_str());
		std::unique_lock<std::mutex> lk(mu_);
		while (!stopping_) {
			cv_.wait(lk, [this] { return stopping_ || !jobs_.empty(); });
			while (!jobs_.empty()) {
				auto job = std::move(jobs_.front());
				jobs_.pop_front();
				lk.unlock();
				job();
				lk.lock();
			}
		}
	}

	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<std::function<void()>> jobs_;
	bool stopping_ = false;
	std::vector<std::thread> threads_;
};

} // namespace bank

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 2;
	double seconds = argc > 2 ? std::atof(argv[2]) : 1e9;
	auto account = std::make_unique<bank::Account>();
	auto pool = std::make_unique<bank::Pool>(2);
	auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
	std::vector<std::thread> workers;
	std::vector<unsigned long> ops(n);

	for (int t = 0; t < n; t++)
		workers.emplace_back([&, t] {
			pthread_setname_np(pthread_self(), ("worker-" + std::to_string(t)).c_str());
			while (std::chrono::steady_clock::now() < deadline) {
				for (int i = 0; i < 256; i++) {
					account->deposit(t + i);
					bank::spin(400);         // work outside the lock
				}
				ops[t] += 256;
			}
		});
	for (auto &w : workers)
		w.join();
	unsigned long total = 0;
	for (auto o : ops)
		total += o;
	std::printf("ops/s: %.0f balance %ld\n", total / seconds, account->balance());
	return 0;
}
