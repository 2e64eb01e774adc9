from fedsheaf.cli.main import entry

entry()
