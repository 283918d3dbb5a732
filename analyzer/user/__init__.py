"""Naming user-space locks: futex waits by ELF symbol or user stack
(userlocks), unwound with the ELF CFI (unwind), names demangled (demangle),
library frames skipped (libraries); Go runtime locks (golocks); application
locks from USDT probes (usdt); kernel locks spun on inside futex calls charged
to the user lock they serve (futexspin)."""
