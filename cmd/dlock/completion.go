package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

func completionCommand() command {
	return command{
		name: "completion", summary: "print a shell completion script (bash or zsh)",
		synopsis: "dlock completion bash|zsh",
		help: `Prints a completion script for the shell: subcommands, their flags, held
lock names after status and unlock (asked of the server with "dlock list
--names"), and command names after "dlock run KEY --".

examples:
  source <(dlock completion bash)                      # in ~/.bashrc
  dlock completion zsh > "${fpath[1]}/_dlock"          # then restart zsh`,
		run: runCompletion,
	}
}

func runCompletion(_ context.Context, e *env, args []string) int {
	c := completionCommand()
	fs := newFlagSet(c.name)
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return code
	}
	if len(a.before) != 1 || a.dashdash {
		return fail(e, c.name, usageErrorf("name one shell: bash or zsh"))
	}
	switch a.before[0] {
	case "bash":
		writeBash(e.stdout)
	case "zsh":
		writeZsh(e.stdout)
	default:
		return fail(e, c.name, usageErrorf("unknown shell %q: bash or zsh", a.before[0]))
	}
	return exitOK
}

// flagNames lists a command's flags as typed on the command line.
func flagNames(c command) []string {
	names := []string{"--help"}
	if c.flags != nil {
		c.flags().VisitAll(func(f *flag.Flag) {
			if f.Usage == "" {
				return // hidden
			}
			if len(f.Name) == 1 {
				names = append(names, "-"+f.Name)
			} else {
				names = append(names, "--"+f.Name)
			}
		})
	}
	sort.Strings(names)
	return names
}

func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return append(names, "help")
}

func writeBash(w io.Writer) {
	fmt.Fprintln(w, "# bash completion for dlock: source <(dlock completion bash)")
	fmt.Fprintln(w, "_dlock() {")
	fmt.Fprintln(w, `	local cur=${COMP_WORDS[COMP_CWORD]} i`)
	fmt.Fprintf(w, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(commandNames(), " "))
	fmt.Fprintln(w, `	for ((i = 2; i < COMP_CWORD; i++)); do`)
	fmt.Fprintln(w, `		if [ "${COMP_WORDS[1]}" = run ] && [ "${COMP_WORDS[i]}" = -- ]; then`)
	fmt.Fprintln(w, `			if [ $((i + 1)) -eq "$COMP_CWORD" ]; then COMPREPLY=($(compgen -c -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi`)
	fmt.Fprintln(w, `			return`)
	fmt.Fprintln(w, `		fi`)
	fmt.Fprintln(w, `	done`)
	fmt.Fprintln(w, `	local words=""`)
	fmt.Fprintln(w, `	case "${COMP_WORDS[1]}" in`)
	for _, c := range commands() {
		words := strings.Join(flagNames(c), " ")
		if c.name == "completion" {
			words = "bash zsh"
		}
		fmt.Fprintf(w, "\t%s) words=%q ;;\n", c.name, words)
	}
	fmt.Fprintf(w, "\thelp) words=%q ;;\n", strings.Join(commandNames(), " "))
	fmt.Fprintln(w, `	esac`)
	fmt.Fprintln(w, `	case "${COMP_WORDS[1]}:$cur" in`)
	fmt.Fprintln(w, `	status:-* | unlock:-*) ;;`)
	fmt.Fprintln(w, `	status:* | unlock:*)`)
	// COMP_WORDBREAKS splits "cron:cleanup" at each ':', so the word being
	// completed is read from the line, and what bash already has up to its last
	// ':' is dropped from the candidates.
	fmt.Fprintln(w, `		local word=$cur`)
	fmt.Fprintln(w, `		if [ -n "${COMP_LINE+x}" ]; then word=${COMP_LINE:0:COMP_POINT}; word=${word##*[[:space:]]}; fi`)
	fmt.Fprintln(w, `		words=$(dlock list --names "${word}*" 2>/dev/null)`)
	fmt.Fprintln(w, `		COMPREPLY=($(compgen -W "$words" -- "$word"))`)
	fmt.Fprintln(w, `		if [[ $word == *:* && $COMP_WORDBREAKS == *:* ]]; then`)
	fmt.Fprintln(w, `			local colon=${word%"${word##*:}"}`)
	fmt.Fprintln(w, `			COMPREPLY=("${COMPREPLY[@]#"$colon"}")`)
	fmt.Fprintln(w, `		fi`)
	fmt.Fprintln(w, `		return ;;`)
	fmt.Fprintln(w, `	esac`)
	fmt.Fprintln(w, `	COMPREPLY=($(compgen -W "$words" -- "$cur"))`)
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -F _dlock dlock")
}

func writeZsh(w io.Writer) {
	fmt.Fprintln(w, "#compdef dlock")
	fmt.Fprintln(w, "# zsh completion for dlock: dlock completion zsh > \"${fpath[1]}/_dlock\"")
	fmt.Fprintln(w, "_dlock() {")
	fmt.Fprintln(w, "\tlocal -a cmds")
	fmt.Fprintln(w, "\tcmds=(")
	for _, c := range commands() {
		fmt.Fprintf(w, "\t\t%s\n", zshQuote(strings.ReplaceAll(c.name, ":", `\:`)+":"+c.summary))
	}
	fmt.Fprintln(w, "\t)")
	fmt.Fprintln(w, "\tif (( CURRENT == 2 )); then _describe 'dlock command' cmds; return; fi")
	fmt.Fprintln(w, `	local sep=${words[(I)--]}`)
	fmt.Fprintln(w, `	if [[ $words[2] == run ]] && (( sep > 2 && sep < CURRENT )); then`)
	fmt.Fprintln(w, `		shift $sep words; (( CURRENT -= sep )); _normal; return`)
	fmt.Fprintln(w, `	fi`)
	fmt.Fprintln(w, `	if [[ ($words[2] == status || $words[2] == unlock) && $PREFIX != -* ]]; then`)
	fmt.Fprintln(w, `		compadd -- ${(f)"$(dlock list --names "${PREFIX}*" 2>/dev/null)"}; return`)
	fmt.Fprintln(w, `	fi`)
	fmt.Fprintln(w, "\tcase $words[2] in")
	for _, c := range commands() {
		words := flagNames(c)
		if c.name == "completion" {
			words = []string{"bash", "zsh"}
		}
		fmt.Fprintf(w, "\t%s) compadd -- %s ;;\n", c.name, strings.Join(words, " "))
	}
	fmt.Fprintf(w, "\thelp) compadd -- %s ;;\n", strings.Join(commandNames(), " "))
	fmt.Fprintln(w, "\tesac")
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, `_dlock "$@"`)
}

func zshQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
