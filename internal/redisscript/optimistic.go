package redisscript

import (
	_ "embed"
)

//go:embed optimistic.lua
var optimisticSrc string

// Optimistic runs one compare-and-set of a versioned value: token.lua followed
// by optimistic.lua, which lists the keys, arguments and reply.
var Optimistic = script(tokenSrc, optimisticSrc)
