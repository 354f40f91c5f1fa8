package driver

import "strings"

// OwnerSep separates the owner ID given with WithOwner from the random part
// that names one acquisition in the owner token a Driver receives: "ID#RANDOM".
// Every backend accepts it in an owner token.
const OwnerSep = "#"

// MaxOwnerLen is the longest owner ID accepted by dlock.WithOwner, in bytes.
const MaxOwnerLen = 128

// SplitOwner splits an owner token into the WithOwner ID and the part that names
// the acquisition. A token made without WithOwner is its own ID: id and
// acquisition are both the whole token.
func SplitOwner(owner string) (id, acquisition string) {
	i := strings.Index(owner, OwnerSep)
	if i < 0 {
		return owner, owner
	}
	return owner[:i], owner[i+len(OwnerSep):]
}
