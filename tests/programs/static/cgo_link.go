// Built into the -cgo programs only (Makefile): importing "C" makes the
// program dynamic, its threads glibc's, as any Go program that uses cgo.
package main

import "C"
