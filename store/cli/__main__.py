from store.cli import main

main()
