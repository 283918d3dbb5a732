/* A program that prints its progress with printf and never flushes:
 * "ops/s: X" every 0.25 s for SECONDS. Into a pipe its lines sit in the C
 * library's block buffer until it exits; stopped before that, they are
 * lost. In a terminal each line comes out as it is printed.
 *
 *   printer SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double start = now(), end = start + (argc > 1 ? atof(argv[1]) : 10), last = start;
	volatile unsigned long x = 0;
	unsigned long ops = 0;

	while (now() < end) {
		for (int i = 0; i < 1000; i++)
			x += i;
		ops++;
		if (now() - last >= 0.25) {
			printf("ops/s: %.1f\n", ops / (now() - last));
			ops = 0;
			last = now();
		}
	}
	return 0;
}
