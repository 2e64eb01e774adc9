from fedsheaf.cli import entry

entry()
