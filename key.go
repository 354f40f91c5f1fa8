package dlock
