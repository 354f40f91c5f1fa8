package redisscript

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed reentrant.lua
var reentrantSrc string

// Reentrant runs one operation of the reentrant mutex: token.lua followed by
// reentrant.lua, which lists the operations, keys, arguments and replies.
var Reentrant = redis.NewScript(tokenSrc + reentrantSrc)
