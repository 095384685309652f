/** The tag the upgrade check moves rollguard to: the same image under a second name, loaded beside the chart's own. */
export const NEXT_TAG = 'e2e-next';
