package redisscript

import (
	_ "embed"
)

//go:embed reentrant.lua
var reentrantSrc string

// Reentrant runs one operation of the reentrant mutex: token.lua followed by
// reentrant.lua, which lists the operations, keys, arguments and replies.
var Reentrant = script(tokenSrc, reentrantSrc)
