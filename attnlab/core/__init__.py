"""The toolkit core: the room table (`registry`), CLI helpers (`clitools`), devices (`device`), experiment
trackers (`tracking`), the reproduction targets' vocabulary (`targets`) and process pools (`parallel`)."""
