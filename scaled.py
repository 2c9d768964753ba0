SCALED = False
