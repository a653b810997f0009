# These import Lightning's names: they run only under the switch, in subprocesses the tests here start.
collect_ignore = ["shaped_library", "lightning_tests"]
