package redisscript

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed optimistic.lua
var optimisticSrc string

// Optimistic runs one compare-and-set of a versioned value: token.lua followed
// by optimistic.lua, which lists the keys, arguments and reply.
var Optimistic = redis.NewScript(tokenSrc + optimisticSrc)
