#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
int main(int argc, char **argv)
{
	struct bpf_object *o = bpf_object__open_file("timer.bpf.o", NULL);
	if (!o || bpf_object__load(o)) { fprintf(stderr, "load failed\n"); return 1; }
	struct bpf_link *l = bpf_program__attach(bpf_object__find_program_by_name(o, "sw"));
	if (!l) { fprintf(stderr, "attach failed\n"); return 1; }
	int secs = argc > 1 ? atoi(argv[1]) : 5;
	printf("attached\n"); fflush(stdout);
	sleep(secs);
	struct bpf_map *m = bpf_object__find_map_by_name(o, ".bss");
	__u64 v[8]; int z = 0;
	bpf_map_lookup_elem(bpf_map__fd(m), &z, v);
	printf("hits %llu user_ok %llu kern_ok %llu starts %llu cancels %llu idle_hits %llu kdepth %llu udepth %llu\n",
	       v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
	bpf_link__destroy(l);
	bpf_object__close(o);
	return 0;
}
