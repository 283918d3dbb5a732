"""Naming kernel locks, best tier first (naming.py): verified by the objects the
iterators walk (objlocks, lockfields, slab, btf), by the kernel image's static data
(kimage), inferred by the rules of the knowledge base (knowledge, locks.toml), or
by the call site; kallsyms symbolizes kernel stacks; sharing tells per-instance
from shared locks."""
