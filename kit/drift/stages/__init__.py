"""The drift study's stages, each one function over a run folder:

    fetch  -> split -> fault -> infer        (score, bootstrap, verify build on these)

``kit.runfolder`` lays out the run folder and writes its manifest.
"""
