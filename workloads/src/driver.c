/* lockscope-workload: the entry point (--list, run, --help). See
 * ../README.md for the formats; driver.h for the files that do the work. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "driver.h"
#include "util.h"

struct drv D = { .sfd = -1, .devnull = -1 };

int main(int argc, char **argv)
{
	/* Never outlive the orchestrator. */
	pid_t ppid = getppid();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		perror(LS_PROG ": error: prctl(PR_SET_PDEATHSIG)");
		return 1;
	}
	if (getppid() != ppid)
		return 1; /* parent already gone */

	if (argc >= 2 && (strcmp(argv[1], "-h") == 0 ||
			  strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
		if (argc > 2)
			bad_input("--list takes no arguments (got '%s')", argv[2]);
		print_list();
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "run") == 0) {
		parse_run_args(argc, argv);
		return run();
	}
	if (argc < 2)
		bad_input("missing command: expected --list or run (see --help)");
	bad_input("unknown command '%s': expected --list or run (see --help)",
		  argv[1]);
}
