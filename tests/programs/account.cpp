// A small C++ program of the shape every server has: N threads deposit into
// one account whose std::mutex is a member of a heap object; the main thread
// joins them. Used by tests/test_demangle.py: the hot lock must be named
// after Account::deposit(long), demangled.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace bank {

class Account {
public:
	__attribute__((noinline)) void deposit(long amount)
	{
		std::lock_guard<std::mutex> guard(mu_);
		for (int i = 0; i < 256; i++)
			balance_ = balance_ * 31 + amount + i;
	}
	long balance() const { return balance_; }

private:
	std::mutex mu_;
	long balance_ = 0;
};

} // namespace bank

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 2;
	long rounds = argc > 2 ? std::atol(argv[2]) : 2000000;
	auto account = std::make_unique<bank::Account>();
	std::vector<std::thread> threads;

	for (int t = 0; t < n; t++)
		threads.emplace_back([&account, rounds, t] {
			for (long i = 0; i < rounds; i++)
				account->deposit(t + i);
		});
	for (auto &th : threads)
		th.join();
	return account->balance() == 42;
}
